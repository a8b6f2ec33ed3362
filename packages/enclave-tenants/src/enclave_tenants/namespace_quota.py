"""The namespace-quota ledgers of tenants: one QuantityLedger per tenant with ``namespaceOptions.quota``, kept
and folded by the write loop.

Admission reserves a namespace on the ledger before it lets one be created; the write loop folds the namespaces
that exist into it (settling reservations whose namespace appeared, dropping those that expired) and removes the
ledgers of tenants that no longer have a quota. Apart from the namespace writes because it has its own timer:
an unconfirmed reservation's expiry (``_fold_at``).

``NamespaceQuota`` is a base of :class:`enclave_tenants.controller.TenantsController`.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from enclave_core.api import names
from enclave_core.api.ledger import QuantityLedgerStatus
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import KubeError
from enclave_core.ledger import LedgerBusyError, LedgerClient, LedgerMissingError, fold, new_ledger
from enclave_core.quantity import Quantity
from enclave_tenants import ledgers
from enclave_tenants.metrics import WRITES
from enclave_tenants.plan import Plan

if TYPE_CHECKING:
    from enclave_tenants.controller import Settings

log = logging.getLogger(__name__)


class NamespaceQuota:
    """Keep and fold each tenant's namespace-quota ledger."""

    settings: Settings
    ledgers: LedgerClient
    ledger_cache: Informer
    _fold_at: float

    async def _namespace_ledgers(self, plan: Plan) -> None:
        """Each tenant with a namespace quota has its ledger, folded; ledgers of others are removed."""
        wanted: set[str] = set()
        due = float("inf")
        now = datetime.now(UTC)
        for name, tenant_plan in plan.tenants.items():
            tenant = tenant_plan.tenant
            options = tenant.spec.namespace_options if tenant is not None else None
            if tenant is None or options is None or options.quota is None:
                continue
            uid = str(tenant_plan.raw["metadata"].get("uid", ""))
            ledger = ledgers.name_of(name, uid)
            wanted.add(ledger)
            live = self.ledger_cache.get(f"{self.settings.namespace}/{ledger}")
            try:
                if live is not None and (live.get("spec") or {}).get("targetRef", {}).get("uid") != uid:
                    await self.ledgers.delete(ledger)  # left over from a deleted tenant of the same name
                    live = None
                if live is None:
                    body = new_ledger(
                        ledgers.target(name, uid), self.settings.namespace, {names.MANAGED_BY: names.TENANTS_MANAGER}
                    )
                    await self.ledgers.ensure(body)
                    WRITES.labels("QuantityLedger", "create").inc()
                present = set(tenant_plan.namespaces)
                used = Quantity.from_units(len(present))

                def step(
                    status: QuantityLedgerStatus | None, present: set[str] = present, used: Quantity = used
                ) -> QuantityLedgerStatus:
                    return fold(
                        status,
                        used,
                        settled=lambda r: (r.object_ref.name or "") in present,
                        gone=lambda hint: (hint.object_ref.name or "") not in present,
                        now=now,
                    )

                _, stored = await self.ledgers.update(ledger, step)
                if stored is not None:
                    WRITES.labels("QuantityLedger", "fold").inc()
            except (KubeError, LedgerMissingError, LedgerBusyError) as err:
                log.warning("namespace quota ledger not folded", extra={"tenant": name, "error": str(err)})
                due = min(due, 1.0)
                continue
            cached = self.ledgers.cached(ledger)
            for reservation in (cached.status.reservations or []) if cached and cached.status else []:
                if reservation.expires_at is not None:
                    due = min(due, max((reservation.expires_at - now).total_seconds(), 0.0) + 0.1)
        for key, raw in list(self.ledger_cache.items.items()):
            name = raw["metadata"]["name"]
            if name not in wanted:
                await self.ledgers.delete(name)
                self.ledger_cache.items.pop(key, None)
                WRITES.labels("QuantityLedger", "delete").inc()
        self._fold_at = time.monotonic() + due  # an unconfirmed reservation's expiry (inf: none)

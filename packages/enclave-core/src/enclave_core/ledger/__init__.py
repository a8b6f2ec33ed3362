"""The QuantityLedger reservation protocol (docs/architecture.md, "QuantityLedger protocol").

Two halves, shared by admission and every quota controller (custom quotas, global resource quotas, pools,
the tenant namespace quota):

* :mod:`enclave_core.ledger.ops`: pure functions on a ledger's status (reserve, roll back, add a
  pending-delete hint, fold), so the arithmetic is unit-tested without a cluster;
* :mod:`enclave_core.ledger.client`: the async read-modify-write of ``status`` with optimistic concurrency
  (the resourceVersion read, bounded retries on 409), the only way anything writes a ledger.
"""

from __future__ import annotations

from enclave_core.ledger.client import LedgerBusyError, LedgerClient, LedgerMissingError
from enclave_core.ledger.ops import (
    DEFAULT_TTL,
    Hold,
    Refusal,
    Totals,
    add_pending_delete,
    fold,
    ledger_name,
    new_ledger,
    reserve,
    rollback,
    totals,
)

__all__ = [
    "DEFAULT_TTL",
    "Hold",
    "LedgerBusyError",
    "LedgerClient",
    "LedgerMissingError",
    "Refusal",
    "Totals",
    "add_pending_delete",
    "fold",
    "ledger_name",
    "new_ledger",
    "reserve",
    "rollback",
    "totals",
]

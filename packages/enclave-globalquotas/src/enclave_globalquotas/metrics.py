"""The global quotas component's Prometheus metrics, in one place for the controller and its ledger side."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from enclave_core.runtime.loops import LoopMetrics

LOOP = LoopMetrics.standard("globalquotas", publishes=True, what="GlobalResourceQuotas snapshots")
WRITES = Counter("enclave_globalquotas_writes_total", "Writes to the cluster", ["kind", "operation"])
COUNTS = Counter(
    "enclave_globalquotas_counts_total",
    "Namespaces counted because their ResourceQuota may report less than what exists",
    ["result"],
)
QUOTAS = Gauge("enclave_globalquotas_quotas", "GlobalResourceQuotas observed")
NOT_READY = Gauge("enclave_globalquotas_not_ready", "GlobalResourceQuotas whose Ready condition is False")

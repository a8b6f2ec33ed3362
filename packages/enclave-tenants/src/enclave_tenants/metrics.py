"""The tenants component's Prometheus metrics, in one place so every part of the controller counts into the same
series (the write loop, its namespace writes, the ledgers and the status writes all count ``WRITES``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter("enclave_tenants_reconciles_total", "Passes of the tenants write loop", ["result"])
PUBLISHES = Counter("enclave_tenants_snapshots_total", "Tenancy snapshots compiled", ["result"])
WRITES = Counter("enclave_tenants_writes_total", "Writes to the cluster", ["kind", "operation"])
TENANTS = Gauge("enclave_tenants_tenants", "Tenants observed")
NAMESPACES = Gauge("enclave_tenants_namespaces", "Namespaces that belong to a tenant")
NOT_READY = Gauge("enclave_tenants_not_ready", "Tenants whose Ready condition is False")
RECONCILE_SECONDS = Histogram("enclave_tenants_reconcile_seconds", "Duration of one write-loop pass")

"""What enclave-quotas' ``/metrics`` says about quotas: no tenant's names unless the operator opts in."""

from __future__ import annotations

from typing import Any, cast

from enclave_quotas.compute import QuotaView, target_ref
from enclave_quotas.controller import QuotasController, Settings
from prometheus_client import REGISTRY, generate_latest

from enclave_core.quantity import Quantity
from enclave_core.snapshots.hub import SnapshotHub


def _views(solar: str, oil: str) -> list[QuotaView]:
    """A CustomQuota of tenant ``solar`` and a GlobalCustomQuota counting a Pod of tenant ``oil`` (the
    registry is the process's: each test uses names of its own)."""
    options = {"spec": {"options": {"emitMetricPerClaimUsage": True}}}
    custom = {"metadata": {"name": f"{solar}-secret-quota", "namespace": f"{solar}-prod"}, **options}
    shared = {"metadata": {"name": f"cluster-pods-{solar}"}, **options}
    claim = ("", "Pod", f"{oil}-prod", f"{oil}-secret-pod")
    return [
        QuotaView(kind="CustomQuota", raw=custom, target=target_ref("CustomQuota", custom), used=Quantity.parse("2")),
        QuotaView(
            kind="GlobalCustomQuota",
            raw=shared,
            target=target_ref("GlobalCustomQuota", shared),
            claims={claim: Quantity.parse("1")},
            used=Quantity.parse("1"),
        ),
    ]


def _scrape(tenant_labels: bool, solar: str, oil: str) -> str:
    kube: Any = cast(Any, None)  # _metrics reads only the views
    settings = Settings(metrics_tenant_labels=tenant_labels)
    QuotasController(kube, settings, SnapshotHub("t"), cast(Any, None))._metrics(_views(solar, oil))
    return generate_latest(REGISTRY).decode()


def test_metrics_carry_no_tenant_names_by_default() -> None:
    text = _scrape(False, "sun", "gas")
    assert 'enclave_quotas_used{kind="GlobalCustomQuota",name="cluster-pods-sun",namespace=""} 1.0' in text
    for name in ("sun-prod", "sun-secret-quota", "gas-"):
        assert name not in text


def test_metrics_tenant_labels_is_the_opt_in_to_per_quota_and_per_claim_series() -> None:
    text = _scrape(True, "solar", "oil")
    assert 'name="solar-secret-quota",namespace="solar-prod"' in text
    assert 'claim_name="oil-secret-pod"' in text

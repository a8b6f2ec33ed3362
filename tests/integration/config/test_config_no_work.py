"""enclave-config does no work where its output does not change (issue 20, "work per event").

A tenant's status moves on every namespace event; the configuration component only reports tenant *names*
and publishes a configuration that does not mention tenants at all. So a tenant's status changing must
neither move the published ServiceConfiguration revision nor write anything to the API. The component's own
counters (``enclave_snapshot_published_total``, ``enclave_kube_requests_total``) are read from its /metrics.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from enclave_testing.components import RunningComponent
from enclave_testing.names import unique
from enclave_testing.waiting import poll

GROUP, VERSION = "enclave.dev", "v1beta2"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
COORDINATION = ("leases", "events")
"""Lease renewals and Events are the runtime's, not the reconcile's: left out of the write count."""


def _metrics(component: RunningComponent) -> tuple[float, dict[str, float]]:
    """(ServiceConfiguration revisions published, reconcile writes by 'METHOD resource')."""
    with urllib.request.urlopen(f"{component.probe_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    published, writes = 0.0, {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "enclave_snapshot_published_total"
                and sample.labels.get("kind") == "ServiceConfiguration"
            ):
                published += sample.value
            if sample.name == "enclave_kube_requests_total":
                method, resource = sample.labels["method"], sample.labels["resource"]
                if method in WRITES and resource not in COORDINATION:
                    writes[f"{method} {resource}"] = sample.value
    return published, writes


def _tenant(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"owners": [{"kind": "User", "name": "alice"}]},
    }


def test_tenant_status_changes_cost_the_configuration_nothing(
    start_config: Callable[..., RunningComponent], kube: Any
) -> None:
    custom = client.CustomObjectsApi(kube)
    name, first, second = unique("cfg"), unique("tnt"), unique("tnt")

    def status_tenants() -> list[str]:
        obj = custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", name)
        return list((obj.get("status") or {}).get("tenants") or [])

    config = start_config(name, unique("ns"))
    custom.create_cluster_custom_object(GROUP, VERSION, "tenants", _tenant(first))
    try:
        poll(lambda: first in status_tenants(), what="the first tenant in status.tenants")
        published, writes = _metrics(config)
        assert published >= 1

        # What the tenants controller does on every namespace event: the tenant's status moves.
        for size in range(1, 6):
            namespaces = [f"{first}-{i}" for i in range(size)]
            custom.patch_cluster_custom_object_status(
                GROUP, VERSION, "tenants", first, {"status": {"size": size, "namespaces": namespaces}}
            )
        # A change that is the component's business, seen after the status changes (one watch stream, in
        # order): once it is reported, every status change before it has been handled too.
        custom.create_cluster_custom_object(GROUP, VERSION, "tenants", _tenant(second))
        poll(lambda: second in status_tenants(), what="the second tenant in status.tenants")

        published_after, writes_after = _metrics(config)
        assert published_after == published, "a tenant's status moved the published configuration"
        moved = {key: value - writes.get(key, 0.0) for key, value in writes_after.items() if value != writes.get(key)}
        assert moved == {"PATCH serviceconfigurations/status": 1.0}, f"writes besides the new status: {moved}"
    finally:
        for tenant in (first, second):
            custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)

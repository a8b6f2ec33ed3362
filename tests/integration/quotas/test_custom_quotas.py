"""Custom quotas against the real control plane: three admission replicas behind one webhook URL, enclave-quotas
counting, every object written through kube-apiserver."""

from __future__ import annotations

import os
from typing import Any

from kubernetes import client

from enclave_testing.waiting import poll

from .harness import QuotaEnclave

BURST_ROUNDS = int(os.environ.get("ENCLAVE_QUOTA_BURST_ROUNDS", "1"))
"""The issue's proof repeats the burst five times (``tox -e quotas-slow``); once in the default suite."""


def configmap(name: str, labels: dict[str, str] | None = None, data: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data or {}}


def count_spec(limit: int, kind: str = "ConfigMap", **source: Any) -> dict[str, Any]:
    return {"limit": limit, "sources": [{"kind": kind, "op": "count", **source}]}


def test_hundred_concurrent_creates_against_a_count_of_ten_admit_exactly_ten(
    enclave: QuotaEnclave, namespace: str
) -> None:
    core = client.CoreV1Api(enclave.wide)
    # every namespace has a kube-root-ca.crt ConfigMap: count only the burst's
    enclave.create_quota(namespace, "ten", count_spec(10, selectors=[{"matchLabels": {"burst": "yes"}}]))
    ledger = enclave.ledger_name(namespace, "ten")
    for round_ in range(BURST_ROUNDS):
        prefix = f"r{round_}-"

        def create(index: int, prefix: str = prefix) -> Any:
            return core.create_namespaced_config_map(namespace, configmap(f"{prefix}{index}", {"burst": "yes"}))

        admitted = enclave.burst(100, create)
        assert sum(admitted) == 10
        stored = [
            cm for cm in core.list_namespaced_config_map(namespace).items if cm.metadata.name.startswith(f"r{round_}-")
        ]
        assert len(stored) == 10
        poll(lambda: enclave.used(namespace, "ten") == "10", what="used 10")
        settled = poll(
            lambda: (status := enclave.ledger(ledger).get("status") or {}).get("reserved") == "0" and status,
            what="ledger settled to reserved 0",
        )
        assert settled["allocated"] == "10"
        core.delete_collection_namespaced_config_map(namespace, label_selector="burst=yes")
        poll(
            lambda: enclave.used(namespace, "ten") == "0" and enclave.ledger(ledger)["status"]["allocated"] == "0",
            what="freed",
        )
    served = [port for port, connections in enclave.balancer.connections.items() if connections]
    assert len(served) == 3, "every replica decided part of the burst"

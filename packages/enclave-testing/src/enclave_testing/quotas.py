"""Waiting for kube-controller-manager's resourcequota controller before a test relies on ResourceQuota status."""

from __future__ import annotations

import time
from functools import partial

from kubernetes import client

from enclave_testing.waiting import poll


def _counts(core: client.CoreV1Api, name: str, namespace: str, resources: set[str]) -> bool:
    return resources <= set(core.read_namespaced_resource_quota(name, namespace).status.used or {})


def wait_for_quota_monitors(core: client.CoreV1Api, namespace: str, timeout: float = 180.0) -> None:
    """Until kube-controller-manager's resourcequota controller counts Enclave's kinds.

    When it discovers new resources (the CRDs a session installed) it stops computing usage until it watches
    them all, for up to its 30 s discovery period; a test that starts in that window sees stale ResourceQuota
    status. A new probe quota on ``count/`` of Enclave's namespaced kinds reports them only once it watches them
    and its workers run again (a quota is counted when created, so each attempt creates a fresh one). Two
    probes in a row must be counted within seconds.
    """
    hard = {"count/quantityledgers.enclave.dev": "100", "count/customquotas.enclave.dev": "100", "pods": "100"}
    deadline = time.monotonic() + timeout
    attempt = 0
    counted = 0
    while counted < 2:
        attempt += 1
        name = f"probe-{attempt}"
        core.create_namespaced_resource_quota(namespace, {"metadata": {"name": name}, "spec": {"hard": hard}})
        try:
            poll(
                partial(_counts, core, name, namespace, set(hard)),
                timeout=5,
                what="kube-controller-manager counting Enclave kinds",
            )
            counted += 1
        except AssertionError:
            counted = 0
            if time.monotonic() > deadline:
                raise
        finally:
            core.delete_namespaced_resource_quota(name, namespace)

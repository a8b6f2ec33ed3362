"""Waiting for kube-controller-manager's resourcequota controller before a test relies on ResourceQuota status,
and bursts of concurrent creates against a quota."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

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


def burst(count: int, create: Callable[[int], Any], attempts: int = 20) -> tuple[int, list[str]]:
    """Run ``create(i)`` for ``count`` indexes at once; (admitted, refusal messages). Each create is sent again
    on kube-apiserver's ResourceQuota conflict (409 when concurrent creates race on a quota's status), as
    kubectl and controllers retry; a 403 is a refusal, anything else fails the test."""

    def one(index: int) -> str | None:
        for _ in range(attempts):
            try:
                create(index)
            except ApiException as err:
                if err.status == 403:
                    return str(err.body)
                if err.status == 409 and "resourcequotas" in str(err.body):
                    continue
                raise
            return None
        raise AssertionError(f"create {index} kept conflicting on the ResourceQuota")

    with ThreadPoolExecutor(max_workers=count) as pool:
        outcomes = list(pool.map(one, range(count)))
    return sum(o is None for o in outcomes), [o for o in outcomes if o is not None]

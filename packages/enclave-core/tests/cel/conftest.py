"""Shared fixtures for the CEL tests: a small Pod and an admission request, as plain dicts."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

NOW = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)


def make_pod() -> dict[str, Any]:
    """A Pod as kube-apiserver would send it (JSON decoded), small enough to read in a test."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web",
            "namespace": "tenant-a-prod",
            "creationTimestamp": "2024-05-01T11:00:00Z",
            "labels": {"app": "web", "enclave.dev/tenant": "tenant-a"},
            "annotations": {"prometheus.io/scrape": "true"},
            "deletionTimestamp": None,
        },
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "registry.example.com/tenant-a/web:1.4.2",
                    "ports": [{"containerPort": 8080}, {"containerPort": 9090}],
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                },
                {
                    "name": "sidecar",
                    "image": "registry.example.com/platform/proxy:2.1.0",
                    "ports": [{"containerPort": 15001}],
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                },
            ]
        },
        "status": {"phase": "Pending"},
    }


def make_request() -> dict[str, Any]:
    return {
        "operation": "CREATE",
        "namespace": "tenant-a-prod",
        "userInfo": {"username": "alice", "groups": ["tenant-a-admins", "system:authenticated"]},
    }


def variables() -> dict[str, Any]:
    return {"object": make_pod(), "oldObject": None, "request": make_request(), "now": NOW}


@pytest.fixture
def pod() -> dict[str, Any]:
    return make_pod()

"""Kubernetes API clients for tests, including clients that impersonate a user and several groups.

The ``kubernetes`` package keeps default headers in a plain dict, so it can send one ``Impersonate-Group``
header at most; kube-apiserver reads one group per header line. We therefore add the impersonation headers
at the urllib3 layer, where a header may repeat.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client, config
from urllib3._collections import HTTPHeaderDict


class _ImpersonatingPool:
    """Wraps a urllib3 pool manager, adding impersonation headers to every request."""

    def __init__(self, pool: Any, user: str, groups: list[str]) -> None:
        self._pool = pool
        self._user = user
        self._groups = groups

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        headers = HTTPHeaderDict(kwargs.pop("headers", None) or {})
        headers["Impersonate-User"] = self._user
        for group in self._groups:
            headers.add("Impersonate-Group", group)
        return self._pool.request(method, url, headers=headers, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def api_client(kubeconfig: Path, *, user: str | None = None, groups: list[str] | None = None) -> Any:
    """A synchronous ``ApiClient`` from ``kubeconfig``; with ``user`` set, every call is impersonated."""
    api = config.new_client_from_config(config_file=str(kubeconfig))
    if user is not None:
        api.rest_client.pool_manager = _ImpersonatingPool(api.rest_client.pool_manager, user, groups or [])
    return api


def core(api: Any) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def custom(api: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)

"""Kubernetes API clients for tests, including clients that impersonate a user and several groups.

The ``kubernetes`` package keeps default headers in a plain dict, so it can send one ``Impersonate-Group``
header at most; kube-apiserver reads one group per header line. We therefore add the impersonation headers
at the urllib3 layer, where a header may repeat.
"""

from __future__ import annotations

import time
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


def create_namespace_retrying(api: Any, name: str, bound: float) -> None:
    """Create namespace ``name`` as ``api``'s caller, retrying while its tenant is not admitted yet (a webhook that
    has not seen the tenant refuses the owner) for ``bound`` seconds; one already there counts as created."""
    deadline = time.monotonic() + bound
    while True:
        try:
            api.create_namespace({"metadata": {"name": name}})
            return
        except client.ApiException as err:
            if err.status == 409:
                return
            if time.monotonic() > deadline or err.status not in (403, 400, 422, 500, 503):
                raise
            time.sleep(0.5)

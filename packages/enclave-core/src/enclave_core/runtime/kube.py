"""The component's connection to kube-apiserver from a kubeconfig file or the in-cluster service account."""

from __future__ import annotations

from enclave_core.kube.connection import Connection, connect


async def api_client(kubeconfig: str = "") -> Connection:
    """A :class:`Connection` for ``kubeconfig``, or in-cluster configuration when it is empty."""
    return connect(kubeconfig)

"""Async Kubernetes API clients from a kubeconfig file or the in-cluster service account."""

from __future__ import annotations

from kubernetes.aio import client, config


async def api_client(kubeconfig: str = "") -> client.ApiClient:
    """An ``ApiClient`` for ``kubeconfig``, or in-cluster configuration when it is empty."""
    if kubeconfig:
        configuration = client.Configuration()
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)

"""Serving certificates read from a ``kubernetes.io/tls`` Secret through a watch.

Components that serve TLS (admission webhooks, gRPC snapshot services) can take their certificate straight
from the Secret enclave-config maintains instead of a mounted file: no kubelet sync delay after a renewal,
and no start-up deadlock for the component that creates the Secret in the first place. Reading happens on
the watch, never per request.
"""

from __future__ import annotations

import asyncio
import base64

from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import Kube, resource_path


class TlsSecretSource:
    """The current (certificate chain, private key) of one Secret, kept fresh by a watch."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self.name = name
        self.namespace = namespace
        self.changed = asyncio.Event()
        self.informer = Informer(
            kube,
            resource_path("v1", "secrets", namespace=namespace),
            field_selector=f"metadata.name={name}",
            on_change=lambda _key: self.changed.set(),
            name=f"secret/{name}",
        )

    def current(self) -> tuple[bytes, bytes] | None:
        secret = self.informer.get(f"{self.namespace}/{self.name}")
        data = (secret or {}).get("data") or {}
        if "tls.crt" not in data or "tls.key" not in data:
            return None
        return base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"])

    def ca(self) -> bytes | None:
        secret = self.informer.get(f"{self.namespace}/{self.name}")
        data = (secret or {}).get("data") or {}
        return base64.b64decode(data["ca.crt"]) if "ca.crt" in data else None

    async def wait_ready(self) -> tuple[bytes, bytes]:
        """Until the Secret holds a certificate and key."""
        while True:
            pair = self.current()
            if pair is not None:
                return pair
            self.changed.clear()
            await self.changed.wait()

    async def run(self) -> None:
        await self.informer.run()

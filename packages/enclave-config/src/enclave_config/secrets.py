"""The Secrets enclave-config keeps, each watched by its own name.

The serving Secret and the components' client Secrets are the only Secrets of the release namespace the config
component touches, so the chart's Role grants read and write on those names alone (``create`` cannot be narrowed
by name): a compromised enclave-config pod does not read whatever else lives in the namespace (Helm's release
Secrets, an operator's credentials). A list or watch is authorised by name only when it selects that one name
(``fieldSelector=metadata.name=<name>``), hence one small watch per Secret instead of one for the namespace;
each starts the first time a reconcile needs its name, and stays (the names change only with
``spec.overrides.TLSSecretName``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube, resource_path

SYNC_TIMEOUT = 30.0


class SecretsUnreadableError(Exception):
    """A Secret's watch has not listed within :data:`SYNC_TIMEOUT` (RBAC, or the apiserver unreachable)."""


class NamedSecrets:
    """``name -> Secret`` of the release namespace for the names asked for, each kept current by its watch."""

    def __init__(self, kube: Kube, namespace: str, on_change: Callable[[str], None]) -> None:
        self.kube = kube
        self.namespace = namespace
        self.on_change = on_change
        self.informers: dict[str, Informer] = {}
        self.tasks: list[asyncio.Task[None]] = []

    async def watch(self, names: Iterable[str]) -> None:
        """Start the watches of ``names`` not watched yet and wait until each has listed."""
        for name in names:
            if name not in self.informers:
                informer = Informer(
                    self.kube,
                    resource_path("v1", "secrets", namespace=self.namespace),
                    field_selector=f"metadata.name={name}",
                    on_change=self.on_change,
                    name=f"secret/{name}",
                )
                self.informers[name] = informer
                self.tasks.append(asyncio.create_task(informer.run(), name=informer.name))
        waiting = [informer.synced.wait() for informer in self.informers.values() if not informer.synced.is_set()]
        try:
            async with asyncio.timeout(SYNC_TIMEOUT):  # not wait_for: on Python 3.11 it can drop a cancellation
                await asyncio.gather(*waiting)
        except TimeoutError:
            unsynced = sorted(name for name, informer in self.informers.items() if not informer.synced.is_set())
            raise SecretsUnreadableError(
                f"cannot read Secrets {', '.join(unsynced)} in {self.namespace} (the chart's Role names each Secret "
                "enclave-config keeps)"
            ) from None

    def get(self, name: str) -> JSON | None:
        informer = self.informers.get(name)
        return informer.get(f"{self.namespace}/{name}") if informer is not None else None

    def stored(self, name: str, secret: JSON) -> None:
        """What a write returned, cached until the watch brings it."""
        self.informers[name].items[f"{self.namespace}/{name}"] = secret

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()

"""What a controller component's controller is built from (:func:`enclave_core.runtime.grpc.snapshot_body` builds
every one the same way): the Lease-fenced API client, the hub it publishes its snapshots on, the Event recorder,
its settings, the configuration gate, and where the Events of cluster-scoped objects go (``spec.events.namespace``
of the ServiceConfiguration once enclave-config's stream says, ``default`` until then).

*The configuration gate.* A process started with ``--config-endpoint`` hears enclave-config's effective
configuration some time after it starts. A controller whose output depends on it (tenants' promotion policy,
replication's impersonation defaults, where globalquotas' Events go) passes :attr:`ControllerBase.configuration`
as its loop's ``gate`` (:class:`enclave_core.runtime.loops.ControllerLoop`), so nothing is published or written
from a guess: a restart never briefly drops promoted owners. Without an endpoint the gate is open from the start
and documented defaults apply (a controller built by hand, in a test or a tool, starts so too). A controller that can act on the defaults (pools, quotas) does not gate on it.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from enclave_core.kube.events import EventRecorder
from enclave_core.kube.rest import Kube
from enclave_core.snapshots.configuration import EffectiveConfiguration
from enclave_core.snapshots.hub import SnapshotHub

SettingsT = TypeVar("SettingsT")


class ControllerBase(Generic[SettingsT]):
    """The parts every controller holds; the component's class adds its informers and loop."""

    def __init__(self, kube: Kube, settings: SettingsT, hub: SnapshotHub, events: EventRecorder) -> None:
        self.kube = kube
        self.settings = settings
        self.hub = hub
        self.events = events
        self.events_namespace = "default"
        """Where a cluster-scoped object's Events go: ``spec.events.namespace`` once enclave-config's stream says."""
        self.configuration = asyncio.Event()
        """Open while the configuration is known: from the start (the defaults apply) unless
        :meth:`wait_for_configuration` closed it, then from the first :meth:`set_configuration`."""
        self.configuration.set()

    def wait_for_configuration(self) -> None:
        """Close the gate until the first :meth:`set_configuration`: the runtime calls it before the controller
        runs when the process follows enclave-config's stream (``--config-endpoint``)."""
        self.configuration.clear()

    def set_events_namespace(self, namespace: str) -> None:
        self.events_namespace = namespace or "default"

    def set_configuration(self, config: EffectiveConfiguration) -> None:
        """Take an effective configuration enclave-config published (the first and every change): where Events
        go, what the controller reads of it (:meth:`configure`), then the gate opens."""
        self.set_events_namespace(config.spec.events.namespace)
        self.configure(config)
        self.configuration.set()

    def configure(self, config: EffectiveConfiguration) -> None:
        """What the controller reads of the configuration besides the events namespace (nothing, unless it
        says); runs before the gate opens, so the first pass sees it."""

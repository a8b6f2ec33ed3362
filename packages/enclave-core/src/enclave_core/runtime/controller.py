"""What a controller component's controller is built from (:func:`enclave_core.runtime.grpc.run_snapshot_controller`
hands the first three over): the Lease-fenced API client, the hub it publishes its snapshots on, the Event
recorder, its settings, and where the Events of cluster-scoped objects go (``spec.events.namespace`` of the
ServiceConfiguration once enclave-config's stream says, ``default`` until then)."""

from __future__ import annotations

from typing import Generic, TypeVar

from enclave_core.kube.events import EventRecorder
from enclave_core.kube.rest import Kube
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

    def set_events_namespace(self, namespace: str) -> None:
        self.events_namespace = namespace or "default"

"""A host's shared informers on the real control plane (issue 33): one upstream watch of namespaces feeds every
component reading them, each on its own thread and loop as ``enclave-host`` runs them, and a component whose
loop is blocked holds back only its own cache.

The consumers here are threads with loops of their own holding a :func:`enclave_core.kube.shared.informer` of
namespaces, as the hosted controllers do; the hub lists and watches kube-apiserver over its own connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from enclave_core.kube import projections, shared
from enclave_core.kube.connection import connect
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import Kube
from enclave_core.kube.shared import SharedInformers, SharedView
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.waiting import poll

LABEL = "enclave.dev/shared-informer-test"


class Consumer:
    """A hosted component's stand-in: a thread and loop of its own, one shared namespace informer, the keys its
    ``on_change`` was called with."""

    def __init__(self, name: str, kubeconfig: str, selector: str) -> None:
        self.name = name
        self.kubeconfig = kubeconfig
        self.selector = selector
        self.changed: set[str] = set()
        self.informer: Informer | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started = threading.Event()
        self.release = threading.Event()
        self._task: asyncio.Task[None] | None = None
        self.thread = threading.Thread(target=asyncio.run, args=(self._main(),), name=f"consumer-{name}", daemon=True)

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        kube = Kube(connect(self.kubeconfig), field_manager=f"test-{self.name}")
        self.informer = shared.informer(
            kube,
            "/api/v1/namespaces",
            label_selector=self.selector,
            on_change=self.changed.add,
            name="namespaces",
            transform=projections.namespace,
        )
        self._task = asyncio.create_task(self.informer.run())
        self.started.set()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        finally:
            await kube.api.close()

    def start(self) -> Consumer:
        self.thread.start()
        self.started.wait(10)
        return self

    def sees(self, name: str) -> bool:
        informer = self.informer
        return informer is not None and informer.synced.is_set() and name in informer.items and name in self.changed

    def stall(self) -> None:
        """Block this consumer's loop (a component stuck in a long computation) until :attr:`release` is set."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self.release.wait)

    def stop(self) -> None:
        self.release.set()
        loop, task = self.loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # stopped already: its loop is closed
                loop.call_soon_threadsafe(task.cancel)
        self.thread.join(10)


@pytest.fixture
def hub(control_plane: ControlPlane) -> Iterator[SharedInformers]:
    running = SharedInformers(lambda: connect(str(control_plane.kubeconfig))).start()
    shared.install(running)
    try:
        yield running
    finally:
        shared.install(None)
        running.stop()


@pytest.fixture
def consumers(control_plane: ControlPlane, hub: SharedInformers) -> Iterator[Callable[[int], list[Consumer]]]:
    started: list[Consumer] = []
    selector = f"{LABEL}={unique('run')}"

    def start(count: int) -> list[Consumer]:
        new = [
            Consumer(f"c{len(started) + index}", str(control_plane.kubeconfig), selector).start()
            for index in range(count)
        ]
        started.extend(new)
        return new

    yield start
    for consumer in started:
        consumer.stop()


def _wait_sees(consumer: Consumer, name: str, why: str = "") -> None:
    poll(lambda: consumer.sees(name), timeout=30, what=f"{consumer.name} sees {name}{why}")


def _create(kube: Any, consumer: Consumer) -> str:
    name = unique("shared")
    value = consumer.selector.partition("=")[2]
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": name, "labels": {LABEL: value}}})
    return name


@pytest.fixture
def created(kube: Any) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        client.CoreV1Api(kube).delete_namespace(name)


def test_one_watch_delivers_every_namespace_to_every_hosted_component(
    kube: Any, hub: SharedInformers, consumers: Callable[[int], list[Consumer]], created: list[str]
) -> None:
    first = consumers(1)[0]
    created.append(_create(kube, first))  # present before the others subscribe: their first sync reports it
    poll(lambda: first.sees(created[0]), timeout=30, what="the first consumer sees the namespace")
    everyone = [first, *consumers(2)]
    created.append(_create(kube, first))
    for consumer in everyone:
        for name in created:
            _wait_sees(consumer, name)
        assert isinstance(consumer.informer, SharedView)
    assert len(hub._entries) == 1, "one upstream informer for the three components"
    (entry,) = hub._entries.values()
    assert len(entry.views) == 3
    # the components' caches hold the upstream's objects, not copies of them
    assert entry.upstream is not None
    held = entry.upstream.items[created[1]]
    assert all(consumer.informer is not None and consumer.informer.items[created[1]] is held for consumer in everyone)


def test_a_stalled_component_does_not_stall_its_neighbours(
    kube: Any, consumers: Callable[[int], list[Consumer]], created: list[str]
) -> None:
    stuck, *others = consumers(3)
    for consumer in (stuck, *others):
        poll(consumer.started.is_set, timeout=10, what="started")
        view = consumer.informer
        assert view is not None
        poll(view.synced.is_set, timeout=30, what=f"{consumer.name} synced")
    stuck.stall()
    try:
        created.append(_create(kube, stuck))
        created.append(_create(kube, stuck))
        for consumer in others:
            for name in created:
                _wait_sees(consumer, name, " beside a stalled one")
        view = stuck.informer
        assert isinstance(view, SharedView)
        assert not any(name in view.items for name in created), "a blocked loop took nothing in"
        assert view.pending() >= 1, "the stalled component's changes wait for it"
    finally:
        stuck.release.set()
    for name in created:
        _wait_sees(stuck, name, " once released")
    # and one that stops leaves the others served
    others[0].stop()
    created.append(_create(kube, stuck))
    for consumer in (stuck, others[1]):
        _wait_sees(consumer, created[-1], " after a neighbour stopped")

"""The process frame every component runs in: logs, probes, signals, leader election, graceful shutdown."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import uvloop

from enclave_core.kube.connection import Connection
from enclave_core.kube.rest import Kube
from enclave_core.runtime import looplag
from enclave_core.runtime.kube import api_client
from enclave_core.runtime.leader import LeaderElector
from enclave_core.runtime.logs import setup_logging
from enclave_core.runtime.options import HostPort
from enclave_core.runtime.probes import ProbeServer, Readiness

log = logging.getLogger(__name__)


class Component:
    """Shared state of a running component, handed to its body."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name = name
        self.args = args
        self.readiness = Readiness()
        self.stopping = asyncio.Event()
        self.api: Connection | None = None
        self.started = asyncio.Event()
        """Set by the body once ``state`` holds what the leader work needs."""
        self.state: dict[str, Any] = {}
        """Objects the body shares with the leader work (e.g. the controller whose writes it enables)."""
        self._background: set[asyncio.Task[Any]] = set()
        self.elector: LeaderElector | None = None
        """The Lease this replica stands for (None without leader election)."""

    @property
    def namespace(self) -> str:
        return str(self.args.namespace)

    def may_write(self) -> bool:
        """Whether this replica may write now: always without leader election, else only while it holds the
        Lease within its renew deadline."""
        return self.elector is None or self.elector.may_write()

    def kube(self, field_manager: str) -> Kube:
        """The component's API client: its writes are fenced by the Lease (``FencedWriteError`` once this
        replica may no longer write), so a replica that lost or overran its lease writes nothing even before
        its controller hears of it."""
        assert self.api is not None
        return Kube(self.api, field_manager=field_manager, fence=self.may_write)

    def spawn(self, coroutine: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """A background task of the body: a failure is logged (the process keeps serving), and shutdown
        cancels it."""
        task = asyncio.create_task(coroutine, name=name)
        self._background.add(task)

        def done(finished: asyncio.Task[Any]) -> None:
            self._background.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                log.error("background task failed", exc_info=finished.exception(), extra={"task": name})

        task.add_done_callback(done)
        return task

    async def cancel_background(self) -> None:
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class Leadable(Protocol):
    """A controller whose writes are enabled while its replica holds the Lease."""

    def set_leading(self, leading: bool) -> None: ...


async def lead_controller(process: Component) -> None:
    """Leader work for the usual shape: every replica reconciles and serves, the Lease holder also writes.

    The body puts its controller in ``process.state["controller"]`` and sets ``process.started``.
    """
    await process.started.wait()
    controller: Leadable = process.state["controller"]
    controller.set_leading(True)
    try:
        await asyncio.Event().wait()
    finally:
        controller.set_leading(False)


Body = Callable[[Component], Coroutine[Any, Any, None]]


def settle_memory(args: argparse.Namespace) -> None:
    """What is alive now (modules, the API client, the probes) lives as long as the process: out of the
    collector's sight, a full collection walks only what serving allocates. Measured on admission: one 50 ms
    gen-2 pause under load without it, with every request in flight waiting. ``--gc-thresholds`` applies to the
    whole interpreter, so a host of several components calls this once with its own flags."""
    gc.freeze()
    thresholds = getattr(args, "gc_thresholds", None)
    if thresholds is not None:
        gc.set_threshold(*thresholds)


async def _serve(component: Component, body: Body, leader_work: Body | None) -> None:
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main.cancel)
    await serve(component, body, leader_work, settle=True)


async def serve(component: Component, body: Body, leader_work: Body | None, *, settle: bool = False) -> None:
    """The frame around one component on the running loop: its probes, its API connection, its Lease (when it
    has leader work and ``--leader-elect``), its body; cancelled, it shuts them down in order.

    A process of its own runs it through :func:`run` (signals, ``settle``); :mod:`enclave_core.runtime.host`
    runs one per hosted component, each on its own loop and thread, and settles the interpreter itself."""
    probes = ProbeServer(HostPort.parse(component.args.probe_address), component.readiness)
    await probes.start()
    component.api = await api_client(component.args.kubeconfig)
    if settle:
        settle_memory(component.args)
    component.spawn(looplag.watch(component.name), "loop-lag")
    elector: LeaderElector | None = None
    if leader_work is not None and getattr(component.args, "leader_elect", False):
        args = component.args
        elector = LeaderElector(
            Kube(component.api, field_manager=f"enclave-{component.name}"),
            name=f"enclave-{component.name}",
            namespace=component.namespace,
            identity=args.identity,
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        )
        component.elector = elector
    tasks: list[asyncio.Task[None]] = [asyncio.create_task(body(component), name=f"{component.name}-body")]
    if leader_work is not None:
        if elector is not None:
            component.readiness.add("leader-election", ready=True)

            async def work() -> None:
                await leader_work(component)

            def note(leading: bool) -> None:
                log.info("leadership changed", extra={"leading": leading})

            tasks.append(asyncio.create_task(elector.run(work, note), name=f"{component.name}-elector"))
        else:
            tasks.append(asyncio.create_task(leader_work(component), name=f"{component.name}-leader"))
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # surface a crash instead of hanging half-alive
    except asyncio.CancelledError:
        log.info("shutting down")
    finally:
        component.stopping.set()
        probes.alive = False
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await component.cancel_background()
        await component.api.close()
        await probes.stop()


def run(name: str, args: argparse.Namespace, body: Body, leader_work: Body | None = None) -> int:
    """Run ``body`` on every replica and ``leader_work`` on the elected one; return the exit code."""
    setup_logging(name, args.log_level, args.log_format)
    component = Component(name, args)
    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=loop_factory(args)) as runner:
        runner.run(_serve(component, body, leader_work))
    return 0


def loop_factory(args: argparse.Namespace) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop unless ``--event-loop=asyncio``: the admission server spends about a fifth less CPU per review
    on it (its TLS has no Python layer), and grpc.aio and aiohttp (our API connection too) run on it (the whole
    integration suite does)."""
    if getattr(args, "event_loop", "uvloop") == "asyncio":
        return None
    return uvloop.new_event_loop

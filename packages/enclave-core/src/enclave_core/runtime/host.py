"""``enclave-host`` / ``python -m enclave_core.runtime.host``: several controller components in one process.

Seven interpreters each loading grpcio, aiohttp, pydantic and the API models cost more memory than the work
they do on a small cluster (issue 33; docs/benchmarks.md, "Memory per shape"). The host loads them once and
runs each named component exactly as its own process would (its flags, its Lease, its gRPC service on its
port, its probes and readiness gates on their port) on an event loop and thread of its own:

- a component whose loop is blocked (a long computation, a blocking call) holds back only its own tasks; the
  others keep their loops and take the interpreter in turns with it (the GIL switches every 5 ms), which
  ``enclave_event_loop_lag_seconds{component}`` shows (docs/benchmarks.md has the measurement);
- the informers that several of them keep (namespaces, Tenants, RuleStatuses) are one per host, on a thread
  and loop of their own, each component reading them as its own cache (:mod:`enclave_core.kube.shared`);
- a component that crashes ends the host (exit 1) as it would end its own process, so the kubelet restarts
  the pod and every Lease it held passes to a standby replica.

The host finds a component's entry point in the ``enclave.components`` entry-point group (each controller
package declares its ``__main__`` there), falling back to ``enclave_<name>.__main__``; it is the only module
that imports components by name (they never import each other). It needs of each only ``parse_args(argv)``
and ``body(component)``; the leader work is :func:`enclave_core.runtime.component.lead_controller`, as every
controller's ``main`` passes it.

Flags: ``--components`` (``ENCLAVE_COMPONENTS``) and the host's own ``--probe-address`` (its ``/readyz`` is
ready when every hosted component is); ``--log-*``, ``--event-loop`` and ``--gc-thresholds`` apply to the
interpreter. Every other flag goes to every hosted component (``--kubeconfig``, ``--namespace``, the TLS and
Lease flags), except ``--<component>:<flag>[=value]``, which goes to that component only as ``--<flag>``
(``--tenants:grpc-address=0.0.0.0:9091``). Environment twins (``ENCLAVE_*``) are the process's, so they reach
every hosted component alike: give what differs by component (addresses) as flags. A component following
enclave-config whose ``--config-endpoint`` is empty subscribes to the hosted enclave-config at
``localhost:<its port>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.metadata
import logging
import signal
import sys
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, cast

from enclave_core.kube import shared
from enclave_core.kube.connection import connect
from enclave_core.kube.shared import SharedInformers
from enclave_core.runtime import component
from enclave_core.runtime.logs import setup_logging
from enclave_core.runtime.options import HostPort, add_env_option, add_interpreter_flags
from enclave_core.runtime.probes import ProbeServer, Readiness

log = logging.getLogger(__name__)

CONTROLLERS = ("config", "tenants", "quotas", "globalquotas", "pools", "replication")
"""The components a host may run. Admission is not one of them: it scales by replicas on its own, and its
per-review work must not share an interpreter with a controller's write pass (docs/architecture.md)."""

HOST_GC_THRESHOLDS = "20000,10,100"
"""The collector's thresholds for the whole interpreter: enclave-tenants' own default (it holds the largest
caches), since one setting serves every hosted component."""

SERVING_GATE = "grpc"
"""The gate every controller's body registers first (``enclave_core.runtime.grpc.serve_snapshots``)."""

ENTRY_POINTS = "enclave.components"
"""The entry-point group each controller package names its ``__main__`` module in."""


def load(name: str) -> ModuleType:
    """The entry-point module of component ``name``: ``parse_args(argv)`` and ``body(component)``."""
    for entry in importlib.metadata.entry_points(group=ENTRY_POINTS, name=name):
        loaded = entry.load()
        if isinstance(loaded, ModuleType):
            return loaded
    return importlib.import_module(f"enclave_{name}.__main__")


@dataclass
class Plan:
    """What the command line asks for: the host's own flags and each component's argv."""

    args: argparse.Namespace
    argv: dict[str, list[str]] = field(default_factory=dict)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="enclave-host", description=__doc__.split("\n\n")[0])
    add_env_option(
        parser,
        "components",
        ",".join(CONTROLLERS),
        f"comma-separated controller components to run in this process, of {', '.join(CONTROLLERS)}",
    )
    add_env_option(
        parser,
        "probe-address",
        "0.0.0.0:8080",
        "host:port of the host's /healthz, /readyz (ready when every hosted component is) and /metrics; each "
        "component keeps its own probes at its --<component>:probe-address",
        env="ENCLAVE_HOST_PROBE_ADDRESS",
    )
    add_interpreter_flags(parser, gc=HOST_GC_THRESHOLDS)
    return parser


def parse_args(argv: list[str] | None = None) -> Plan:
    """The host's flags, then every other argument routed: ``--<component>:<flag>`` (with its value, joined by
    ``=`` or as the next argument) to that component, anything else to every hosted component."""
    parser = _parser()
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    names = [name.strip() for name in args.components.split(",") if name.strip()]
    unknown = [name for name in names if name not in CONTROLLERS]
    if not names or unknown or len(set(names)) != len(names):
        parser.error(f"--components: want distinct names of {', '.join(CONTROLLERS)}, got {args.components!r}")
    args.components = names
    common: list[str] = []
    own: dict[str, list[str]] = {name: [] for name in names}
    index = 0
    while index < len(rest):
        arg = rest[index]
        flag = arg.split("=", 1)[0]
        target, colon, name = flag[2:].partition(":") if flag.startswith("--") else ("", "", "")
        if not colon:
            common.append(arg)
            index += 1
            continue
        if target not in own:
            parser.error(f"{flag}: {target!r} is not a hosted component ({', '.join(names)})")
        routed = ["--" + name + arg[len(flag) :]]
        if "=" not in arg and index + 1 < len(rest) and not rest[index + 1].startswith("--"):
            routed.append(rest[index + 1])
            index += 1
        own[target] += routed
        index += 1
    return Plan(args, {name: [*common, *own[name]] for name in names})


@dataclass
class Hosted:
    """One component on its own thread and loop, with its own :class:`~enclave_core.runtime.component.Component`."""

    name: str
    module: ModuleType
    args: argparse.Namespace
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None
    component: component.Component | None = None
    thread: threading.Thread | None = None
    error: BaseException | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _task: asyncio.Task[None] | None = None
    _stop_requested: bool = False
    running: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)

    def start(self, on_finished: Callable[[Hosted], None]) -> None:
        def run() -> None:
            _names.name = self.name
            try:
                with asyncio.Runner(loop_factory=self.loop_factory) as runner:
                    runner.run(self._serve())
            except asyncio.CancelledError:
                pass
            except BaseException as err:  # reported to the host, which ends the process
                self.error = err
                log.error("component failed", exc_info=err)
            finally:
                self.finished.set()
                on_finished(self)

        self.thread = threading.Thread(target=run, name=f"enclave-{self.name}", daemon=True)
        self.thread.start()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self.component = component.Component(self.name, self.args)
        self.running.set()
        if self._stop_requested:
            return
        body = cast(Callable[[component.Component], Coroutine[Any, Any, None]], self.module.body)
        await component.serve(self.component, body, component.lead_controller)

    def stop(self) -> None:
        """Cancel the component's frame from any thread (it shuts down as on SIGTERM)."""
        self._stop_requested = True
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(task.cancel)

    def ready(self) -> bool:
        """The component's own readiness, once its body has registered its gates: every hosted controller
        serves snapshots (gate ``grpc``), and before that gate exists no gate could be closed yet."""
        hosted = self.component
        if hosted is None or self.finished.is_set():
            return False
        try:
            return SERVING_GATE in hosted.readiness and hosted.readiness.ready
        except RuntimeError:  # a gate added on the component's thread while this one read them
            return False

    def detail(self) -> str:
        hosted = self.component
        if hosted is None or SERVING_GATE not in hosted.readiness:
            return "starting"
        try:
            return ", ".join(hosted.readiness.not_ready()) or "ok"
        except RuntimeError:
            return "changing"


class _Names(threading.local):
    name = "host"


_names = _Names()


class _ComponentField(logging.Filter):
    """Every line names the component whose thread wrote it (the JSON ``component`` field)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.component = _names.name
        return True


def _log_setup(args: argparse.Namespace) -> None:
    setup_logging("enclave-host", args.log_level, args.log_format)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_ComponentField())
        if args.log_format == "text":
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(component)s %(name)s: %(message)s"))


def component_args(plan: Plan) -> dict[str, argparse.Namespace]:
    """Each component's own parser over its argv; then the hosted enclave-config as the default endpoint, and
    addresses checked distinct (two listeners on one port would fail only at start, half-way up)."""
    parsed = {name: load(name).parse_args(argv) for name, argv in plan.argv.items()}
    config = parsed.get("config")
    if config is not None:
        endpoint = f"localhost:{HostPort.parse(config.grpc_address).port}"
        for name, args in parsed.items():
            if name != "config" and hasattr(args, "config_endpoint") and not args.config_endpoint:
                args.config_endpoint = endpoint
    taken: dict[int, str] = {HostPort.parse(plan.args.probe_address).port: "host --probe-address"}
    for name, args in parsed.items():
        for flag in ("probe_address", "grpc_address"):
            port = HostPort.parse(getattr(args, flag)).port
            if port in taken:
                raise SystemExit(
                    f"enclave-host: --{name}:{flag.replace('_', '-')} uses port {port}, as {taken[port]} does: "
                    "give each hosted component its own addresses"
                )
            taken[port] = f"--{name}:{flag.replace('_', '-')}"
    return parsed


async def host(plan: Plan, hosted: list[Hosted], stop: asyncio.Event | None = None) -> int:
    """Run ``hosted`` until ``stop`` is set (by default: until SIGTERM or SIGINT) or one of them ends, then stop
    them all; 0, or 1 when a component ended on its own. The host's probes serve meanwhile."""
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    readiness = Readiness()
    for each in hosted:
        readiness.add_check(each.name, each.ready, detail=each.detail)
    probes = ProbeServer(HostPort.parse(plan.args.probe_address), readiness)
    await probes.start()
    crashed: list[str] = []

    def finished(each: Hosted) -> None:
        if not each._stop_requested:
            crashed.append(each.name)
            loop.call_soon_threadsafe(stop.set)

    for each in hosted:
        each.start(finished)
    for each in hosted:  # settle the interpreter once every component has its connection and probes
        await asyncio.to_thread(each.running.wait)
    component.settle_memory(plan.args)
    log.info("hosting", extra={"components": [each.name for each in hosted]})
    try:
        await stop.wait()
    finally:
        probes.alive = False
        if crashed:
            log.error("a hosted component ended; stopping the others", extra={"ended": crashed})
        for each in hosted:
            each.stop()
        for each in hosted:
            await asyncio.to_thread(each.finished.wait)
        await probes.stop()
    return 1 if crashed else 0


def shared_informers(
    parsed: dict[str, argparse.Namespace], loop_factory: Callable[[], asyncio.AbstractEventLoop] | None
) -> SharedInformers | None:
    """The hosted components' shared caches (:mod:`enclave_core.kube.shared`), when they all reach kube-apiserver
    as the same identity (one ``--kubeconfig``, or all in-cluster): a cache listed as one component must not
    be read by another that may not list it. Several components are needed for sharing to save anything."""
    kubeconfigs = {str(getattr(args, "kubeconfig", "") or "") for args in parsed.values()}
    if len(parsed) < 2 or len(kubeconfigs) != 1:
        return None
    (kubeconfig,) = kubeconfigs
    return SharedInformers(lambda: connect(kubeconfig), loop_factory)


def main(argv: list[str] | None = None) -> int:
    plan = parse_args(argv)
    _log_setup(plan.args)
    parsed = component_args(plan)
    factory = component.loop_factory(plan.args)
    hosted = [Hosted(name, load(name), parsed[name], factory) for name in plan.args.components]
    hub = shared_informers(parsed, factory)
    if hub is not None:
        shared.install(hub.start())
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(host(plan, hosted))
    finally:
        if hub is not None:
            shared.install(None)
            hub.stop()


if __name__ == "__main__":
    sys.exit(main())

"""Liveness, readiness and Prometheus metrics on one small HTTP listener per process.

Readiness is a set of named gates that the component opens as it gets ready (leader elected or standing by,
snapshots received, caches synced); ``/readyz`` lists the closed ones, which is what an operator wants to see
when a pod stays unready.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from enclave_core.runtime.options import HostPort


class Readiness:
    """Named readiness gates; the process is ready when every registered gate is open."""

    def __init__(self) -> None:
        self._gates: dict[str, bool] = {}
        self._checks: dict[str, Callable[[], bool]] = {}

    def add(self, name: str, ready: bool = False) -> None:
        self._gates.setdefault(name, ready)

    def set(self, name: str, ready: bool = True) -> None:
        self._gates[name] = ready

    def add_check(self, name: str, check: Callable[[], bool]) -> None:
        """A gate computed on demand (e.g. 'the snapshot is younger than X')."""
        self._checks[name] = check

    def not_ready(self) -> list[str]:
        closed = [name for name, ready in self._gates.items() if not ready]
        for name, check in self._checks.items():
            try:
                if not check():
                    closed.append(name)
            except Exception:  # a failing check is a closed gate, never a crashed probe
                closed.append(name)
        return sorted(closed)

    @property
    def ready(self) -> bool:
        return not self.not_ready()


class ProbeServer:
    """Serves /healthz, /readyz and /metrics."""

    def __init__(self, address: HostPort, readiness: Readiness, registry: CollectorRegistry = REGISTRY) -> None:
        self.address = address
        self.readiness = readiness
        self.registry = registry
        self.alive = True
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/livez", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n" if self.alive else "shutting down\n", status=200 if self.alive else 503)

    async def _readyz(self, _: web.Request) -> web.Response:
        closed = self.readiness.not_ready()
        if not closed:
            return web.Response(text="ok\n")
        return web.Response(text="not ready: " + ", ".join(closed) + "\n", status=503)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.address.host, self.address.port).start()

    async def stop(self) -> None:
        self.alive = False
        if self._runner is not None:
            await self._runner.cleanup()
